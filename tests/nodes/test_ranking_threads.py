import threading

from nodes import ranking


def test_stems_are_right_when_many_threads_rank_at_once():
    """Queue workers with --concurrency and the async API rank in parallel threads."""
    query = "international shipping customs duties returned warranties payments"
    expected = ranking.terms(query)
    errors: list[BaseException] = []
    wrong: list[list[str]] = []

    def work() -> None:
        for _ in range(300):
            try:
                got = ranking.terms(query)
            except Exception as exc:  # noqa: BLE001 - a shared stemmer raised IndexError here
                errors.append(exc)
            else:
                if got != expected:
                    wrong.append(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and wrong == []
