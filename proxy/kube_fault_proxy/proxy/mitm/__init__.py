"""Everything that touches mitmproxy: the fault addon, upstream-loss propagation, the master."""
