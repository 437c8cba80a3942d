"""The placement benchmark: solve-time percentiles, a mixed job stream against two reference
placers, and the optimality gap against an exact MILP on small clusters. Prints JSON."""
