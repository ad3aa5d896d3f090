"""CLI command `tfsmith deploy`: Kubernetes manifests that place each serving image only where it can run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the deploy command to the tfsmith app."""

    @app.command("deploy")
    def deploy(
        model_name: str = typer.Option(None, "--model-name", help="Name of the Service and prefix of every object "
                                       "(default: the images' io.tfsmith.model.name with --from-images)."),
        targets: str = typer.Option(None, "--targets", help="Build targets, e.g. x86-64-v3,x86-64-v4,sapphirerapids "
                                    "(images: --image-prefix:<target tag>)."),
        image_prefix: str = typer.Option(None, "--image-prefix", help="Repository of the per-target images, with --targets."),
        image: list[str] = typer.Option(None, "--image", help="TARGET=IMAGE (repeat or comma-separate)."),
        from_images: str = typer.Option(None, "--from-images", help="Image refs to read targets and digests from (needs the engine)."),
        # Not the shared CudaCcOption: this describes images already built (for their labels and affinity);
        # `auto` would mean this host's GPUs, which say nothing about the fleet's images.
        cuda_cc: str = typer.Option(None, "--cuda-cc", help="CUDA capabilities the images were built for (with --targets/--image)."),
        model_sha256: str = typer.Option(None, "--model-sha256", help="Model digest for labels (with --targets/--image)."),
        served_name: str = typer.Option(None, "--served-name", help="Model name in the server's URLs (default: --model-name)."),
        report: Path = typer.Option(None, "--report", help="tfsmith optimize report.json (or its folder): resources from its measurement."),
        cpu: str = typer.Option(None, "--cpu", help="CPU request per pod (500m, 2); limit is 2x. Default 1 or the report's threads."),
        memory: str = typer.Option(None, "--memory", help="Memory request per pod (512Mi, 2Gi); limit is 2x."),
        replicas: int = typer.Option(2, "--replicas", help="Replicas per target (the HPA's minimum)."),
        max_replicas: int = typer.Option(6, "--max-replicas", help="HPA maximum per target."),
        cpu_target: int = typer.Option(70, "--cpu-target", help="HPA target, % of the CPU request."),
        namespace: str = typer.Option(None, "--namespace", help="Namespace of the namespaced objects."),
        exclusive: bool = typer.Option(False, "--exclusive", help="Require (not just prefer) that a node runs only "
                                       "the best image it can."),
        kserve: bool = typer.Option(False, "--kserve", help="KServe InferenceServices instead of Deployments + HPAs."),
        out: Path = typer.Option(..., "--out", help="Output folder (replaced if an earlier deploy wrote it)."),
        fmt: str = typer.Option("yaml", "--format", help="yaml (one file for kubectl apply -f) or kustomize."),
        explain_node: Path = typer.Option(None, "--explain-node", help="A /proc/cpuinfo: say which image NFD + the "
                                          "scheduler would run on that machine."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
    ) -> None:
        """Write Kubernetes manifests running each target's image only on nodes NFD says can run it."""
        from builder.deploy import inputs, manifests, output, plan
        from builder.errors import InputError

        ways = [w for w, given in (("--targets", targets), ("--image", image), ("--from-images", from_images)) if given]
        if len(ways) != 1:
            raise InputError("give exactly one of --targets (with --image-prefix), --image TARGET=REF, --from-images")
        served = served_name
        if targets:
            if not image_prefix:
                raise InputError("--targets needs --image-prefix (the repository the per-target images are in)")
            images = inputs.from_targets(targets, image_prefix, cuda_cc=cuda_cc, model_sha256=model_sha256)
        elif image:
            images = inputs.from_pairs(image, cuda_cc=cuda_cc, model_sha256=model_sha256)
        else:
            if cuda_cc or model_sha256:
                raise InputError("--from-images reads CUDA capabilities and the model digest from the images")
            from builder.engine import default_engine

            images, label_name = inputs.from_engine(from_images, default_engine())
            served = served or label_name
            model_name = model_name or (label_name or "").lower().replace("_", "-")
        if not model_name:
            raise InputError("--model-name is required (the images carry no io.tfsmith.model.name)")
        if report is not None:
            from builder.report import Report, ReportError

            try:
                data = Report.load(report)
            except ReportError as error:
                raise InputError(f"--report: {error}") from None
            resources = plan.resources_from_report(data, cpu=cpu, memory=memory)
        else:
            resources = plan.default_resources(cpu=cpu, memory=memory)
        options = plan.DeployOptions(
            model_name=model_name, namespace=namespace, replicas=replicas, max_replicas=max_replicas,
            cpu_target_percent=cpu_target, exclusive=exclusive, kserve=kserve, served_name=served,
        )
        fleet_plan = plan.plan_fleet(images, options, resources)
        objects = manifests.fleet(fleet_plan)
        files = output.layout(fleet_plan, objects, fmt)
        node = _explain(explain_node, objects) if explain_node is not None else None
        output.write(out, files)
        summary = {
            "out": str(out),
            "files": sorted(name for name in files if not name.startswith(".")),
            "deploy_digest": fleet_plan.digest,
            "members": [{"name": m.name, "target": m.image.target.name, "image": m.image.image, "rank": m.rank,
                         "nfd_labels": list(m.placement.labelled), "rule_flags": list(m.placement.rule_only),
                         "guard_only": list(m.placement.invisible)} for m in fleet_plan.members],
            "resources": {"cpu": f"{resources.cpu_millis}m", "memory": f"{resources.memory_mib}Mi",
                          "source": resources.source},
            "notes": list(fleet_plan.notes),
        }
        if node is not None:
            summary["explain_node"] = node
        if as_json:
            sys.stdout.write(json.dumps(summary, indent=2) + "\n")
            return
        for member in fleet_plan.members:
            sys.stdout.write(f"{member.rank}. {member.name}: {member.image.image} ({member.image.target.name})\n")
        sys.stdout.write(f"resources per pod: {summary['resources']['cpu']} CPU, {summary['resources']['memory']} "
                         f"({resources.source})\n")
        for note in fleet_plan.notes:
            sys.stdout.write(f"note: {note}\n")
        if not served:
            sys.stdout.write(f"note: clients ask /v1/models/{fleet_plan.served_name} (readiness probes ask "
                             "/v2/health/ready, which names no model); if the images serve another name (their "
                             "io.tfsmith.model.name), pass --served-name\n")
        if node is not None:
            sys.stdout.write(f"{explain_node}: {node['verdict']}\n")
        sys.stdout.write(f"wrote {len(summary['files'])} file(s) to {out}; apply with "
                         f"`kubectl apply {'-k' if fmt == 'kustomize' else '-f'} {out}` (needs NFD"
                         f"{' and KServe' if kserve else ''} in the cluster)\n")


def _explain(cpuinfo: Path, objects: list[dict]) -> dict:
    """Which of the fleet's workloads NFD + the scheduler would run on the machine of this cpuinfo dump."""
    from builder.deploy import simulate
    from builder.errors import InputError
    from builder.guard import cpuinfo_flags, parse_cpuinfo
    from builder.hardware.cpu import arch_of

    try:
        data = parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"))
    except OSError as error:
        raise InputError(f"--explain-node {cpuinfo}: {error.strerror}") from None
    arch = arch_of(data, "unknown")
    labels = simulate.node_labels(arch, cpuinfo_flags(data), objects)
    fits = [o["metadata"]["name"] for o in simulate.workloads(objects) if simulate.can_schedule(o, labels)]
    best = simulate.best_for_node(objects, labels)
    verdict = (f"runs {', '.join(best)}" + (f" (may also run {', '.join(f for f in fits if f not in best)})"
                                            if len(fits) > len(best) else "")) if best else "runs none of these images"
    return {"may_run": fits, "best": best, "verdict": verdict}
