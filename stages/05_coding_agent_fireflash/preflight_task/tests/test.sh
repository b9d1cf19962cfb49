#!/bin/bash
# Harbor verifier: runs from the working directory after the agent finishes.
mkdir -p /logs/verifier
if [ "$(cat /app/status.txt 2>/dev/null)" = "ready" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
