"""The operator's file sync of docker, pod and e2b sandboxes: `passes` runs a workspace's
passes (a turn of its kopf daemon, `memplane_operator.handlers.sync_daemon`); `state` is
what they keep between passes and the pure rules they follow, which the reconcile reads
too (`memplane_operator.context.Runtime.syncs`).

Nothing is imported here: `state` stands below the reconcile's context and `passes` above
its steps, so importing either must not load the other."""
