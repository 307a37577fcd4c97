"""Subcommands of `kuberl` beyond the core ones in kuberl.cli, one module per family.

Each module here defines `add_commands(sub)`, which adds its subparsers with `set_defaults(func=...)`;
a `func` takes the parsed arguments and returns the exit code. kuberl.cli lists the modules in
COMMAND_MODULES. A module imports nothing heavy at its top: `kuberl --help` loads them all.
"""
