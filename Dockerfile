# The golemq-pg image of docker-compose.yml: the package from this checkout with the web and
# metrics extras, run as a non-root user. Its entry point is the `golemq-pg` command:
#
#   docker build -t golemq-pg:local .
#   docker run --rm -e GOLEMQ_DSN=postgresql://... golemq-pg:local migrate
#
# A worker of your own needs its module importable in the image: build FROM this one and
# COPY (or pip install) your application, or mount it and set PYTHONPATH.
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# What the build reads (pyproject.toml names README.md as the package's readme); the rest of
# the checkout stays out of the image (.dockerignore).
WORKDIR /build
COPY pyproject.toml README.md ./
COPY golemq_pg ./golemq_pg
COPY sql ./sql
RUN pip install ".[web,metrics]" \
    && rm -rf /build

RUN useradd --create-home --uid 10001 golemq
USER golemq
WORKDIR /home/golemq

ENTRYPOINT ["golemq-pg"]
CMD ["--help"]
