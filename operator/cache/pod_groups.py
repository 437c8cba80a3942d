"""The gangs of workloads Railyard places without owning them (a JobSet, an LWS group, an indexed Job, a pod group:
topology/cluster/workload_groups.py): which pods each has, kept as pods come and go, for act/adoption.py and the
gang's TrainingJob (decide/adopted_gangs.py)."""

from __future__ import annotations

from railyard.operator.base.objects import Key, PodView


class PodGroups:
    def __init__(self) -> None:
        self._pods: dict[Key, set[Key]] = {}  # (namespace, group key) -> pod keys
        self._changed: dict[Key, int] = {}  # (namespace, group key) -> the stamp of its last change

    def changed(self, held: PodView | None, view: PodView | None, stamp: int) -> None:
        """A pod was stored (`view`) over what was held (`held`), or removed (`view` None); `stamp`: a number new
        at each change (ClusterState's)."""
        for pod in (held, view):
            if pod is not None and pod.member is not None:
                self._changed[(pod.namespace, pod.member.group)] = stamp
        if held is not None and held.member is not None and (
                view is None or view.member is None or view.member.group != held.member.group):
            group = (held.namespace, held.member.group)
            members = self._pods.get(group)
            if members is not None:
                members.discard(held.key)
                if not members:
                    del self._pods[group]
                    self._changed.pop(group, None)
        if view is not None and view.member is not None:
            self._pods.setdefault((view.namespace, view.member.group), set()).add(view.key)

    def version(self, namespace: str, group: str) -> int:
        """Changes whenever one of the group's pods does (what a pass may skip its gang on); -1: no pods."""
        return self._changed.get((namespace, group), -1)

    def pods(self, namespace: str, group: str) -> list[Key]:
        return sorted(self._pods.get((namespace, group), ()))

    @property
    def groups(self) -> list[Key]:
        return sorted(self._pods)
