"""Projects, principals and their tokens: who is asking, at which level, in
which project.  Tokens are stored hashed and compared in constant time."""
