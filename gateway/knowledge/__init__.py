"""The trust gate: entries and their states (`model`), the trust rule as pure
functions (`trust`), and the use cases that move entries through it inside
one store transaction each (`service`), with the other ways candidates
arrive (`threads` and `extraction`, `proposals`), the served playbook and
moving a project between stores (`transfer`)."""
