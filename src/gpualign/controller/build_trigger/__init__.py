"""The build trigger (`gpualign controller --build`), behind one small interface: `BuildTrigger.sync`,
`.garbage_collect` and `.status` (trigger.py).

- decisions.py: what to build, retry, hold or delete. Pure.
- job.py: a build Job's manifest, and what a Job's object says of its build. Pure.
- jobs_api.py: every API call the trigger makes (and `read_cluster`, for `status` and `why`).
- preflight.py: what the controller checks before it starts with `--build`.
"""
