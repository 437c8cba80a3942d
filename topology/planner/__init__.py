"""The offline planner (`railyard plan`): Kubernetes-style YAML read with errors that name the file, object and
field, cluster profiles expanded into nodes, the plan, and its table output."""
