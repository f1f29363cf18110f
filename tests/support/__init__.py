"""What the tests share: builders, fakes and lab helpers (fixtures stay in the conftests;
no test module imports another)."""
