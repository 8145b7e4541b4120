//! placeholder: the window limiters (issue 5).
