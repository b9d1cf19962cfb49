#!/bin/bash
echo ready > /app/status.txt
