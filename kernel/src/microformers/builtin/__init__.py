"""Built-ins of the kernel distribution, registered through its own entry point like any plugin."""
