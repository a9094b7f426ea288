"""Real NSQ daemons for nsqclient's tests: build and cluster scripts, a development auth server."""
