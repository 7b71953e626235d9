#!/usr/bin/env python3
"""Table A1's counts of a PGN file, computed by python-chess: the reference
`chessbench ingest` must equal on the same games.

For the standard games of the file (without a FEN tag) that have at least
one move: games; distinct boards (`board.fen()`, en passant only when legal,
the start and final boards included) as state-value records; those with a
legal move as behavioural-cloning records; and their legal moves as
action-value records. Prints one JSON object.

  python3 bench/table_a1_python.py games.pgn[.zst]
"""

import io
import json
import subprocess
import sys

import chess.pgn


def main():
    path = sys.argv[1]
    if path.endswith(".zst"):
        data = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
        stream = io.StringIO(data.decode())
    else:
        stream = open(path)
    games, boards = 0, {}
    while True:
        game = chess.pgn.read_game(stream)
        if game is None:
            break
        if "FEN" in game.headers or game.errors:
            continue
        board = game.board()
        fens = [board.fen()]
        for move in game.mainline_moves():
            board.push(move)
            fens.append(board.fen())
        if len(fens) == 1:
            continue
        games += 1
        for fen in fens:
            if fen not in boards:
                boards[fen] = None
    moves = 0
    with_move = 0
    for fen in boards:
        n = chess.Board(fen).legal_moves.count()
        if n:
            with_move += 1
            moves += n
    print(json.dumps({"games": games, "state_value": len(boards),
                      "behavioral_cloning": with_move, "action_value": moves}))


if __name__ == "__main__":
    main()
