"""The build feature: turning settings and a target into a TensorFlow image, one room per step.

    settings.py       tfsmith.toml / TFSMITH_* / flags -> BuildConfig (one precedence rule, validated)
    from_settings.py  BuildConfig -> BuildTarget + BuildPlan (the one settings -> plan path)
    plan.py           BuildPlan: pure, frozen, validated data (what `--dry-run` shows is what gets built)
    render.py         BuildPlan -> Docker build context (Dockerfile, .bazelrc.user, manifest, guard)
    run.py            the build on an Engine: cached by spec digest, tagged, pushed
    matrix.py         the CI matrix for a fleet, one id per image that `build --only` takes

The TF <-> toolchain tables (`builder.compat`) stay outside: host detection (`builder.hardware`) and target
resolution read them too, and both sit below this package. Nothing here is carried into serving images.
Submodules are imported where used, so `tfsmith detect` loads none of the planning code.
"""
