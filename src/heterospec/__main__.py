from heterospec.cli import entry

entry()
