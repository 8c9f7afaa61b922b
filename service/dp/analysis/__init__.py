"""Questions about fits rather than fits: private evaluation (evaluation), private choice of λ and η
(selection), the privacy-utility planner (planning), and a job's estimated work (work)."""
