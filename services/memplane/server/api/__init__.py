"""The gRPC edge: the only server package that imports grpc and the generated code."""
