"""The sandbox GitHub: a small, honest GitHub for Baton's demo and end-to-end tests.

`server` builds and runs it; `hub` holds one instance's state and rules; `api/` serves the
REST operations (each declaring, in `permissions`, what it asks of an App installation) and
the App-manifest registration, `git_http` serves git over HTTP; `refs`, `events` and
`checks` carry out what GitHub does when branches, issues, pull requests and checks change,
`lifecycle` what it does when issues, repositories and installations are deleted, moved or
suspended, `ci` runs a repository's `.sandbox/ci` (one check, or a matrix), `calls` counts
the calls and keeps the primary rate limits, `secondary` GitHub's secondary limits (content
writes a minute and an hour, requests at once), `webhooks` signs and delivers the events.
"""
