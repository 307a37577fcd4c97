"""What evaluation actors reply with: their episodes, joined in the order the actors were given their seeds."""

from __future__ import annotations

import pickle

from kuberl.trainer.evaluation.episodes import PlayedEpisodes


def test_evaluation_actors_parts_join_in_order_with_the_first_video() -> None:
    parts = [PlayedEpisodes([1.0, 2.0], [10, 20]), PlayedEpisodes([3.0], [30], b"mp4"), PlayedEpisodes([4.0], [40])]
    joined = PlayedEpisodes.joined(parts)
    assert (joined.returns, joined.lengths, joined.video) == ([1.0, 2.0, 3.0, 4.0], [10, 20, 30, 40], b"mp4")
    assert PlayedEpisodes.joined([PlayedEpisodes([1.0], [5])]).video is None
    assert PlayedEpisodes.joined([]) == PlayedEpisodes([], [])


def test_a_reply_crosses_a_process_boundary_as_it_was() -> None:
    played = PlayedEpisodes([1.5, -2.0], [3, 4], b"mp4")
    assert pickle.loads(pickle.dumps(played)) == played
