"""Human (``--format human``) output of every command, one module per command, one function per output.

Each takes the rich console and the command's JSON-able result (and what the
result does not carry, such as the output folder); JSON output needs no renderer.
"""
