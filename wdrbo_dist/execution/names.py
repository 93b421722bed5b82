"""The names of the backends, where the config can check a study's `backend` without
importing the backends themselves (which import the run, torch and Ray)."""

BACKENDS = ("serial", "local", "ray")
