"""The GPU path on an offline GPU node: ``heterospec gpu bundle`` (where a package index is reachable) and
``heterospec gpu check`` (on the node, from the unpacked bundle's ``check.py``; or here with ``--device cpu``).
docs/gpu_check.md says what each writes."""
