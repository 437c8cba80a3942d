"""The TrainingJob API as Railyard reads and writes it: the spec and status models (pydantic), the pod template's
typed parts, Kubernetes quantities and timestamps."""
