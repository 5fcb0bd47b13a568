#!/bin/sh
# `make docker-check`: build the image, run it, wait for its HEALTHCHECK to say healthy, then stop and remove it.
# Where no Docker engine answers (`docker info` fails) it says so in one line and exits 0.
# DOCKER_CHECK_TIMEOUT: seconds to wait for "healthy" (default 600: the first check runs 30 s after the start, the
# start period is 60 s, and a cold start on 2 cores loads the default model first); DOCKER_CHECK_POLL: seconds
# between two looks (default 5).
set -u
IMAGE=${DOCKER_CHECK_IMAGE:-attnviz:check}
NAME=${DOCKER_CHECK_NAME:-attnviz-check}
TIMEOUT=${DOCKER_CHECK_TIMEOUT:-600}
POLL=${DOCKER_CHECK_POLL:-5}

if ! docker info >/dev/null 2>&1; then
    echo "docker-check: no Docker engine here (docker info fails): the image was not built or run"
    exit 0
fi

docker build -t "$IMAGE" . || exit 1
docker rm -f "$NAME" >/dev/null 2>&1
docker run -d --name "$NAME" --memory 8g "$IMAGE" >/dev/null || exit 1
trap 'docker rm -f "$NAME" >/dev/null 2>&1' EXIT INT TERM

waited=0
while :; do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$NAME" 2>/dev/null || echo missing)
    [ "$(docker inspect --format '{{.State.Running}}' "$NAME" 2>/dev/null)" = true ] || status=stopped
    case "$status" in
        healthy)
            echo "docker-check: $IMAGE built and healthy after ${waited} s"
            exit 0 ;;
        unhealthy|missing|stopped)
            echo "docker-check: the container is $status; its last log lines:" >&2
            docker logs --tail 20 "$NAME" >&2
            exit 1 ;;
    esac
    if [ "$waited" -ge "$TIMEOUT" ]; then
        echo "docker-check: not healthy after $TIMEOUT s (status: $status)" >&2
        exit 1
    fi
    sleep "$POLL"
    waited=$((waited + POLL))
done
