"""This project's own collect traces as the replay reads them (:mod:`.reader`), each call priced at its own
measured time (:mod:`.call_times`, the schedule-only check's profile), and the ``measured`` profile fitted on them
(:mod:`.fit`)."""
