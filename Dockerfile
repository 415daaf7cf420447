# Baton: one image for every process; the command picks it (`baton web`, `baton worker`,
# `baton clock`). Agent CLIs are optional, named at build time:
#   docker build --build-arg AGENT_CLIS="claude codex aider" -t baton .
# Baton's packages are the versions uv.lock pins. See docs/deploy.md.

# Claude Code and Codex come from npm and need Node.js. They are installed in a stage of
# their own, so the final image carries Node.js only when one of them is asked for.
FROM node:22-bookworm-slim AS npm-clis
ARG AGENT_CLIS=""
RUN set -eu; \
    packages=""; \
    for cli in $AGENT_CLIS; do \
        case "$cli" in \
            claude) packages="$packages @anthropic-ai/claude-code" ;; \
            codex) packages="$packages @openai/codex" ;; \
            aider) ;; \
            *) echo "AGENT_CLIS: unknown agent CLI '$cli' (known: claude codex aider)" >&2; exit 1 ;; \
        esac; \
    done; \
    mkdir -p /out/bin /out/lib; \
    if [ -n "$packages" ]; then \
        npm install --global --prefix /out $packages; \
        cp "$(command -v node)" /out/bin/node; \
    fi

# uv installs Baton from uv.lock: the version Heroku's Python buildpack builds with.
FROM ghcr.io/astral-sh/uv:0.12.5 AS uv

# The Python of .python-version.
FROM python:3.11-slim-bookworm
ARG AGENT_CLIS=""
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# git for mirrors and worktrees; bubblewrap for the agent's sandbox (bwrap); tini reaps
# whatever an agent leaves behind.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends git bubblewrap tini ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 --shell /usr/sbin/nologin baton

COPY --from=npm-clis /out/ /usr/local/
# aider pins its own dependencies: it gets a virtualenv of its own, beside Baton's packages.
RUN case " $AGENT_CLIS " in \
        *" aider "*) \
            python -m venv /opt/aider \
            && /opt/aider/bin/pip install aider-chat \
            && ln -s /opt/aider/bin/aider /usr/local/bin/aider ;; \
    esac

# Baton's own virtualenv, from the lock and the image's Python only: `--locked` fails the
# build when uv.lock no longer matches pyproject.toml. The locked packages are a layer of
# their own, rebuilt only when the lock changes.
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PROJECT_ENVIRONMENT=/opt/baton/.venv \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1 \
    PATH=/opt/baton/.venv/bin:$PATH
WORKDIR /opt/baton
COPY pyproject.toml uv.lock .python-version README.md ./
RUN uv sync --locked --no-editable --no-install-project
COPY bot ./bot
COPY handlers ./handlers
COPY jobs ./jobs
RUN uv sync --locked --no-editable && rm -rf build *.egg-info

# Mirrors, worktrees, transcripts and the agent's home; a worker wants a volume here.
ENV BATON_DATA_DIR=/data HOME=/home/baton
RUN mkdir -p /data && chown baton:baton /data
VOLUME /data

# A volume is mounted owned by root: started as root, the entrypoint hands BATON_DATA_DIR
# to the baton user and runs the command as baton. Started as any other user, it runs the
# command as that user.
RUN printf '%s\n' \
        '#!/bin/sh' \
        'set -eu' \
        'if [ "$(id -u)" = 0 ]; then' \
        '    mkdir -p "$BATON_DATA_DIR"' \
        '    chown baton:baton "$BATON_DATA_DIR"' \
        '    exec setpriv --reuid=baton --regid=baton --init-groups "$@"' \
        'fi' \
        'exec "$@"' \
        > /usr/local/bin/baton-entrypoint \
    && chmod 755 /usr/local/bin/baton-entrypoint

EXPOSE 8000
ENTRYPOINT ["tini", "--", "baton-entrypoint"]
CMD ["baton", "web"]
