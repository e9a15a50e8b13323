"""Facades with other memory libraries' APIs over the memplane client, so code written
for them moves to memplane by changing an import (`memplane.compat.mem0`). Part of the
bare client install: grpcio, protobuf and googleapis-common-protos only."""
