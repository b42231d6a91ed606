"""The command line door: `relayroom` (`main`), one module per command group."""
