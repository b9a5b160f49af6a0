"""gRPC adapter: servicers, status mapping, registration, and a small client."""
