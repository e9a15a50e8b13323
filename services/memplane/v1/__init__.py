"""Generated protobuf and gRPC code for memplane.v1 (do not edit)."""
