"""memplane's Kubernetes operator: MemoryWorkspace and SandboxClass (memplane.io/v1alpha1)
reconciled by kopf, talking to the services only through the AdminService client SDK.
Run it with `memplane-operator` (cli.py) or `kopf run -m memplane_operator.main`."""
