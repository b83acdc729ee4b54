"""What a request to the apiserver means: its identity, a Binding's target, watch events, Status bodies."""
