"""Draft trees: the static tree (``tree``), one step's drafted token tree (``draft``), filling a static tree
from a proposer (``tree_walk``), and tree files and tree families (``tree_io``)."""
