"""The adapter bank: many tasks' adapter-only weights over one frozen base (adapter_bank)."""
