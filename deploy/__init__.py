"""Serving Attention Explorer to a room: N app processes behind nginx, each browser session kept on one.

One ``streamlit run app.py`` runs its Python on one core, so capacity comes from more processes, not threads.
``python -m deploy.serve --workers N`` (:mod:`deploy.serve`) starts them with a front (:mod:`deploy.nginx`,
the template ``deploy/nginx.conf``) and supervises them (:mod:`deploy.procs`); ``python -m deploy.worker`` is one
app process as a container runs it (``deploy/Dockerfile``, ``deploy/compose.yaml``, ``deploy/k8s/``). See
``docs/deployment.md``.

This package starts processes only: it never imports Streamlit or the model.
"""

from __future__ import annotations


class DeployError(RuntimeError):
    """Serving could not start or go on; the message says why and what to do (printed without a traceback)."""
