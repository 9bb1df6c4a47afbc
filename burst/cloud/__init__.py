"""The clouds: the Provider protocol and its typed errors (provider), the pool lifecycle from
intent to deletion (provision), and what can be launched where at what price (catalog)."""
