"""Trace replay: reasoning traces (the HeteroReason artifact's, and this project's own collect and serving runs)
replayed on modelled heterogeneous systems. Subpackages, lowest first; each imports only from those before it
(tests/test_layering.py):

* :mod:`.schedules` — schedule policies: how one problem's steps become operations on the devices and the link.
* :mod:`.simulator` — the single-request simulator: its input (steps, problems), the system it runs on, the engines
  that time operations, the discrete-event replay of one problem and its metrics; the latency-profile interface.
* :mod:`.profiles` — latency profiles, what each model call costs: the artifact's formulas, datasheet rooflines,
  the HLS performance model, fits on measured calls, measured batch prices.
* :mod:`.artifact` — the HeteroReason artifact: its JSON traces imported, its events as steps, its own replay
  formulas, its Figure 8 tables.
* :mod:`.traces` — this project's collect traces as the simulator reads them, their calls' own times, and the
  ``measured`` profile fitted on them.
* :mod:`.grid` — the replay stage: every trace set x system x schedule x profile, the group entries it runs.
* :mod:`.load` — the load replay: many requests at once on shared devices, batching, capacity at an SLO.
* :mod:`.validation` — the simulator against real runs: the collect runs, the serving run, their noise.
"""
