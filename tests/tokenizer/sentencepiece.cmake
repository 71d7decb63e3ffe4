# The sentencepiece oracle suite: models trained by sentencepiece's own trainer on the KJV text
# under every normalization rule and option (tests/tokenizer/sp_oracle.py), encoded and decoded by
# the Python sentencepiece, compared exactly with ours (sp_oracle_test.cc). Needs Debian's
# python3-sentencepiece and bible-kjv; the script fails with a clear message without them.
# Debian's python3-sentencepiece lives with the system Python, whatever python3 PATH finds first.
set(MIXSERVE_SP_PYTHON /usr/bin/python3 CACHE FILEPATH "A Python with the sentencepiece module")
add_executable(sp_oracle_test ${CMAKE_CURRENT_SOURCE_DIR}/sp_oracle_test.cc)
target_link_libraries(sp_oracle_test PRIVATE mixserve_engine ${BLAS_LIBRARIES} GTest::gtest GTest::gtest_main)
target_compile_options(sp_oracle_test PRIVATE ${MIXSERVE_WARNINGS})
add_test(NAME tokenizer_sentencepiece_oracle
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sp_oracle_run.sh ${MIXSERVE_SP_PYTHON}
                 ${CMAKE_SOURCE_DIR}/build/tokenizer-oracles/sp $<TARGET_FILE:sp_oracle_test>)
set_tests_properties(tokenizer_sentencepiece_oracle PROPERTIES TIMEOUT 900 PROCESSORS 2 LABELS oracle)
