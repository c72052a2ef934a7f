"""A level's nodes as the compiled backward loops over them: one run per core, tiles within.

`runs` splits a level's nodes into one run per core (`Run`), each whole tiles of NODE_TILE
nodes and then its rest in tiles of REST_TILES; a `Tile` gives its nodes' positions and rows
while `adjoint_emit` builds a loop nest over them.  A run of 21 nodes::

    for tile in range(2):  nodes 8*tile .. 8*tile + 7      (the whole tiles, a loop)
    if rest // 1 % 2:      node 20                         (rest = 5: a tile of 1 ...)
    if rest // 4 % 2:      nodes 16 .. 19                  (... and one of 4)

(A nest on AMX tiles takes the rest as one tile of 5 nodes: `Run.tiles(one_rest=True)`.)
"""
from __future__ import annotations

import contextlib

from tvm.script.ir_builder import tirx as Tb

#: nodes per iteration of a level's loop: a weight row read by a contraction serves them all
NODE_TILE = 8
#: the tiles of the nodes past a run's whole tiles: one of each whose bit is set in the rest
REST_TILES = (1, 2, 4)


class Tile:
    """`tile_size` nodes of a level, from position `first`, while their loop nests are built (an int, or
    for the rest of `Run.tiles(one_rest=True)` an expression: its nodes' count, known when it runs)."""

    def __init__(self, first, tile_size, offset, size, row_base):
        self.first, self.tile_size = first, tile_size
        self.offset, self.size, self.row_base = offset, size, row_base

    def node(self, t):
        """(position, row) of the t-th node."""
        position = self.first + t
        return position, self.row_base + position

    @contextlib.contextmanager
    def nodes(self, positions=False, tile_index=False):
        """A loop over the nodes: yields (row, node), or (position, row) with positions=True, plus
        the index among them."""
        with Tb.serial(0, self.tile_size) as t:
            position, row = self.node(t)
            first = (position, row) if positions else (row, self.offset + position)
            yield first + ((t,) if tile_index else ())


class Run:
    """One core's run of a level's nodes, positions [first, first + count) of the level: whole
    tiles of NODE_TILE nodes, then the rest in tiles of REST_TILES, one of each whose bit is set
    in the rest (a run of 7 nodes: tiles of 1, 2 and 4, so each weight vector read serves up to
    4 nodes, not 1)."""

    def __init__(self, first, count, offset, size, row_base, columns=None):
        self.first, self.count = first, count
        self.offset, self.size, self.row_base = offset, size, row_base
        #: None: every column of a nest; (share, shares): the share-th of `shares` parts of the
        #: columns of each contraction nest (`column_shares`)
        self.columns = columns
        self.whole = Tb.bind(count // NODE_TILE)

    def tiles(self, one_rest: bool = False) -> list:
        """[(tile size, a context manager giving the `Tile` of each tile of that size, whether
        it is a loop)]: the whole tiles' loop, then an If for each rest tile; one_rest: an If for
        one tile of the whole rest, its size the rest's count (a tile of NODE_TILE rows whatever
        its nodes, as AMX's: `adjoint_amx`), in place of one per REST_TILES size: listed with the tile
        size NODE_TILE (the rows its tiles take), its `Tile.tile_size` an expression (no unroll over it)."""
        @contextlib.contextmanager
        def whole_tiles():
            with Tb.serial(0, self.whole) as tile:
                yield Tile(self.first + tile * NODE_TILE, NODE_TILE, self.offset, self.size, self.row_base)
        kinds = [(NODE_TILE, whole_tiles, True)]
        rest = self.count - self.whole * NODE_TILE
        if one_rest:
            @contextlib.contextmanager
            def rest_tile():
                with Tb.If(rest > 0):
                    with Tb.Then():
                        yield Tile(self.first + self.whole * NODE_TILE, rest, self.offset, self.size, self.row_base)
            return kinds + [(NODE_TILE, rest_tile, False)]
        for size in REST_TILES:
            @contextlib.contextmanager
            def rest_tile(size=size):
                # the rest's bits above `size` are the nodes the larger rest tiles took
                with Tb.If(rest // size % 2 == 1):
                    with Tb.Then():
                        yield Tile(self.first + self.whole * NODE_TILE + rest // (2 * size) * (2 * size), size,
                                     self.offset, self.size, self.row_base)
            kinds.append((size, rest_tile, False))
        return kinds

    def each(self, body):
        """body(Tile) for each tile of the run."""
        for _, tiles, _ in self.tiles():
            with tiles() as level:
                body(level)


def runs(offset, size, row_base, parallel, shares, body):
    """body(Run) for the nodes [offset, offset + size), split into `shares` runs of equal size
    (give or take a node), one per iteration of a loop, parallel or not.  Runs of equal size
    keep the cores equally busy (24 nodes on 2 cores: 12 each, not two tiles of 8 on one and 4
    on the other), with one fork and join per level."""
    loop = Tb.parallel if parallel else Tb.serial
    with loop(0, shares) as share:
        first = Tb.bind(size * share // shares)
        count = Tb.bind(size * (share + 1) // shares - first)
        body(Run(first, count, offset, size, row_base))


def column_shares(offset, size, row_base, shares, body):
    """body(Run) for all the nodes [offset, offset + size) at once, in a parallel loop over
    `shares` parts of the columns of the contraction nests that body emits (`Run.columns`,
    `adjoint_nest.emit_nest`).  Each core then reads its part of the weight, not all of it (a
    level's runs of nodes each read every column of U), and a level of one node keeps every
    core busy.  The nests must not read what another node's nests in the same loop write."""
    with Tb.parallel(0, shares) as share:
        body(Run(0, size, offset, size, row_base, columns=(share, shares)))


def segments(items, split) -> list:
    """[(split, [items])]: `items` in order, in runs of those `split` marks (one item each) and of
    the others (as many as follow one another)."""
    out = []
    for item in items:
        if split(item):
            out.append((True, [item]))
        elif out and not out[-1][0]:
            out[-1][1].append(item)
        else:
            out.append((False, [item]))
    return out


def in_segments(items, splits, nodes, shares, node_runs, emit, after=None):
    """emit(run, group) for the nests of `items` in order over `nodes` (offset, size, row_base,
    parallel): each item `splits` marks on shares of its columns over all the nodes
    (`column_shares`, when a parallel level has several cores to share), the others in runs of
    nodes (node_runs(offset, size, row_base, parallel, body): `runs` or a GPU's layout), each a
    parallel loop of its own; after(run) behind the last run of nodes' nests.  With no item
    split this is one loop, as before the split existed."""
    offset, size, row_base, parallel = nodes
    groups = segments(items, lambda item: parallel and shares > 1 and splits(item))
    if after is not None and (not groups or groups[-1][0]):
        groups.append((False, []))
    last = len(groups) - 1
    for index, (split, group) in enumerate(groups):
        tail = after if index == last else None

        def body(run, group=group, tail=tail):
            emit(run, group)
            if tail is not None:
                tail(run)
        if split:
            column_shares(offset, size, row_base, shares, body)
        else:
            node_runs(offset, size, row_base, parallel, body)
