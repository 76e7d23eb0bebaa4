"""The SimAdapter protocol (Hou et al. 2021) and its baselines as the library's recipe task ``simadapter``: the task
(:mod:`.protocol`), its settings (:mod:`.spec`, the stage languages following the recipe's in :mod:`.languages`,
the ``self_training`` section in :mod:`.self_training_settings`), its stages (:mod:`.stages`), the test-set
evaluation (:mod:`.evaluation`), the self-training rounds and their rows (:mod:`.self_training`,
:mod:`.self_training_rows`) and the dry run on a tiny corpus in the Common Voice layout (:mod:`.dry_run`,
:mod:`.cv_layout`).

Importing the package is light; :mod:`.protocol` registers the task when the recipe engine asks for it
(:data:`~adaptspeech.recipes.options.LIBRARY_TASKS`).
"""
