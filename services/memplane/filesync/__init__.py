"""Two-way sync of a workspace's Markdown view with its sandbox: `sync_once`
takes the sandbox's edits in over the client SDK and renders the view again;
`restore_deleted` brings back a memory whose file was deleted."""

from memplane.client.restore import restore_deleted
from memplane.filesync.sync import FILE_SYNC, SyncReport, sync_once

__all__ = ["FILE_SYNC", "SyncReport", "restore_deleted", "sync_once"]
