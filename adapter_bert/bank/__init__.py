"""The adapter bank: many tasks' adapter-only weights over one frozen base.

  adapter_bank  the bank's directory: its base, adding, checking and removing tasks
  base_paths    the base's paths recorded relative to the bank, so that it can move
  bank_tasks    a bank's tasks and its base weights read whole, with every check
                (what serving/ and fusion/ take)
  listing       a task's header-only facts (TaskInfo), and the table that
                manage_bank.py `list` prints

The command that lists, adds and removes tasks is manage_bank.py, at the top level.
"""
