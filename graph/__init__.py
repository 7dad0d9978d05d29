"""State, graph factory, storage and command-line entry points of mandapi-resume.

Nothing is compiled or opened at import time: `graph.agent.build_graph` compiles
the graph for a given checkpointer, and `graph.store.open_store` opens a database.
"""
