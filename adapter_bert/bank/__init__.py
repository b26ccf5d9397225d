"""The adapter bank: many tasks' adapter-only weights over one frozen base.

  adapter_bank  the bank's directory: its base, adding, checking and listing tasks
  bank_tasks    a bank's tasks and its base weights read whole, with every check
                (what serving/ and fusion/ take)
  manage        `python -m adapter_bert.bank.manage`: list, add, remove
"""
