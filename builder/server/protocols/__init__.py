"""The handlers of the route table (`builder.server.routes`): TF Serving's REST and gRPC APIs, the Open Inference
Protocol, health and the API document. They only translate between a wire format and the data plane
(`builder.server.core.dataplane`), and raise what went wrong; the router writes every answer's error."""
