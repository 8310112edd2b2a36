"""Offline tree optimization: the candidate tree, calibration (direct, replay, from traces), the exact
pruning knapsack, export of trees and families, depth profiles (STAND paper §3.3)."""
