"""Write-back: add, write conversations, update, delete, erase by scope, history."""
