"""The cluster as the solver sees it, read from Node and Pod objects: GPU nodes and the immutable snapshot of
what is free, label schemes and topology levels, DRA devices, which pods' GPU claims to believe, what a
template may run on and how many replicas a node fits, and when a node holding ranks counts as lost."""
