"""The process runtime: tasks, isolated workers, the fork server, the pool, the jobserver.

Nothing here imports a compiler stage: a task names its function as
`"package.module:function"`, and the runtime only moves bytes between processes.
"""
