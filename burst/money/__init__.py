"""Money: pool time into charges (meter), the append-only ledger and budgets (ledger), budget
alerts (alerts), finance reports (report), and matching cloud bills to the ledger (bills)."""
