"""`tfsmith deploy`: Kubernetes manifests that run each serving image only on nodes whose CPU (and GPU)
can run it.

    inputs (flags, or image labels via the engine) -> FleetImage per target
    plan.plan_fleet      -> DeployPlan (placement from each BuildTarget, preference order, resources)
    manifests.fleet      -> Kubernetes objects (NodeFeatureRule, Service, Deployments, PDBs, HPAs, or
                            KServe InferenceServices)
    output.layout/write  -> one YAML file or a kustomize folder, staged and renamed into place

Placement speaks Node Feature Discovery's labels (builder/deploy/nfd.py holds NFD's labelling rules as
data); simulate.py evaluates rendered manifests the way NFD and the scheduler would, for tests and for
`--explain-node`. Everything but inputs.from_engine and output.write is pure.
"""
