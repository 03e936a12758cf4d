"""What every bench script shares: ``procfs`` (the /proc readers), ``priority`` (the command
prefixes that set a process's scheduling) and ``llm_imports`` (the one place the scripts import
llm_users from)."""
