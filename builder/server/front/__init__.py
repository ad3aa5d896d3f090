"""The front: the one process clients reach. It holds the listening sockets (HTTP/1.1 and gRPC), refuses what it
must at once, and hands each request whole to the models: in its own process, or the least busy model process
(`model_processes`, `balancer`), which it supervises. It decodes nothing (`builder.server` says where each part is)."""
