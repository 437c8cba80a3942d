"""What every layer of the operator stands on: the names Railyard writes on objects, the enums of
reasons and states, settings, the clock, metric definitions and typed views of API objects.

Must not import anything from the layers above (decide, cache, kube, act, app)."""
