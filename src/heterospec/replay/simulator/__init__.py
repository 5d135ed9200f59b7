"""The single-request simulator: one problem's steps (:mod:`.steps`, :mod:`.problem`) replayed on a system
(:mod:`.system`) under a schedule, as operations on the draft, PRM and target devices and the link, timed by an
engine (:mod:`.engines`) and priced by a latency profile (:mod:`.latency`'s interface); :mod:`.des` runs one problem,
:mod:`.metrics` turns its operation log into a results row."""
